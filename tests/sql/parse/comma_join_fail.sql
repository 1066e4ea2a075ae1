-- expect: UnsafeQuery
SELECT COUNT(*) FROM students, marks
