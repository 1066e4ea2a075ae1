-- expect: UnsafeQuery
-- match: neither a GROUP BY key nor inside an aggregate
SELECT scholarship + 1 FROM students
