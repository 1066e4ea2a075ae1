-- expect: UnsafeQuery
-- match: subquer
SELECT COUNT(*) FROM (SELECT * FROM students)
