-- expect: UnsafeQuery
-- match: subquer
SELECT COUNT(*) FROM students WHERE scholarship > (SELECT AVG(scholarship) FROM students)
