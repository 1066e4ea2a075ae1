-- expect: UnsafeQuery
-- match: LIMIT
SELECT COUNT(*) FROM students LIMIT 1 + 1
