-- expect: UnsafeQuery
-- match: arithmetic on aggregates
SELECT COUNT(*) * 2 FROM students
