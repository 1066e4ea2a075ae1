-- expect: UnsafeQuery
-- match: GROUP BY accepts
SELECT COUNT(*) FROM students GROUP BY birth_year / 10
