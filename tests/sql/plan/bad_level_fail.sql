-- expect: InvalidParameter
-- match: level
-- options: {"epsilon": 1, "level": 1.5}
SELECT COUNT(*) FROM students
