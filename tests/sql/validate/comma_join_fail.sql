-- expect: UnsafeQuery
-- match: cross join
SELECT COUNT(*) FROM students, marks
