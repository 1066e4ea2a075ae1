-- expect: InvalidParameter
-- match: rho
-- options: {"rho": 0.1}
SELECT COUNT(*) FROM students
