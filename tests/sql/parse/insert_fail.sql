-- expect: UnsafeQuery
INSERT INTO students VALUES ('s1')
