-- expect: UnsafeQuery
SELECT COUNT(*) OVER () FROM students
