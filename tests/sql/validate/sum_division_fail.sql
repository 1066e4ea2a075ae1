-- expect: UnsafeQuery
-- match: range contains 0
SELECT SUM(100 / scholarship) FROM students
