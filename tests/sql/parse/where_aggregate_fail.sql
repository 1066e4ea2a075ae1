-- expect: UnsafeQuery
-- match: HAVING
SELECT COUNT(*) FROM students WHERE COUNT(*) > 1
