SELECT COUNT(*) FROM students WHERE student_id <> 's00001'
