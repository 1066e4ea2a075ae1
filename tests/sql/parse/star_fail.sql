-- expect: UnsafeQuery
-- match: SELECT \*
SELECT * FROM students
