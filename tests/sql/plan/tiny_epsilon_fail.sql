-- expect: InvalidParameter
-- match: too small
-- options: {"epsilon": 1e-9}
SELECT COUNT(*) FROM students
