-- expect: UnsafeQuery
-- match: privacy unit
SELECT student_id, COUNT(*) FROM students GROUP BY student_id
