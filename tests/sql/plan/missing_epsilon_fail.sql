-- expect: InvalidParameter
-- match: epsilon
-- options: {}
SELECT COUNT(*) FROM students
