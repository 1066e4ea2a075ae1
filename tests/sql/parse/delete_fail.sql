-- expect: UnsafeQuery
DELETE FROM students
