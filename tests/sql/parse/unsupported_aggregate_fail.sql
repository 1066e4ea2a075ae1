-- expect: UnsafeQuery
-- match: MODE
SELECT MODE(scholarship) FROM students
