-- expect: UnsafeQuery
-- match: MAX
SELECT MAX(scholarship) FROM students
