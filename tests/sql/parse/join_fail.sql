-- expect: UnsafeQuery
-- match: join
SELECT COUNT(*) FROM students JOIN marks ON students.student_id = marks.student_id
