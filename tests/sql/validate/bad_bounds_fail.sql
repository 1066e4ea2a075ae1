-- expect: InvalidParameter
-- match: lower < upper
-- options: {"epsilon": 1, "bounds": {"scholarship": [10, 1]}}
SELECT SUM(scholarship) FROM students
