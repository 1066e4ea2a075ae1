-- expect: UnsafeQuery
-- match: partition selection
SELECT COUNT(*) FROM students GROUP BY birth_year / 10
