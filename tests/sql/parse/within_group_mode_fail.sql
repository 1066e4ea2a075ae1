-- expect: UnsafeQuery
-- match: WITHIN GROUP
SELECT MODE() WITHIN GROUP (ORDER BY scholarship) FROM students
