-- expect: InvalidParameter
-- options: {"epsilon": -1}
SELECT COUNT(*) FROM students
