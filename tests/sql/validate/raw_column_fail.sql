-- expect: UnsafeQuery
SELECT scholarship FROM students
