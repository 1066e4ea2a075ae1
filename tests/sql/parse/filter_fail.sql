-- expect: UnsafeQuery
SELECT COUNT(*) FILTER (WHERE gender = 'male') FROM students
