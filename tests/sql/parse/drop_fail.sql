-- expect: UnsafeQuery
-- match: DROP
DROP TABLE students
