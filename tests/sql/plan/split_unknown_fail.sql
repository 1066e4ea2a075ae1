-- expect: InvalidParameter
-- match: split
-- options: {"epsilon": 1, "split": {"zzz": 1}}
SELECT COUNT(*) AS n FROM students
