-- expect: UnsafeQuery
-- match: plain column
SELECT SUM(scholarship * 2) FROM students
