-- expect: UnsafeQuery
-- match: every output
SELECT scholarship + 1 FROM students
