-- expect: UnsafeQuery
SELECT COUNT(*) FROM main.students
