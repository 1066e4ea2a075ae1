-- expect: UnsafeQuery
CREATE TABLE x AS SELECT COUNT(*) FROM students
