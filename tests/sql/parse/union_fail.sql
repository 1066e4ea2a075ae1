-- expect: UnsafeQuery
SELECT COUNT(*) FROM students UNION SELECT COUNT(*) FROM students
