-- expect: UnsafeQuery
SELECT COUNT(*) FROM students WHERE COUNT(*) > 1
