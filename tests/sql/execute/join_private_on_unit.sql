SELECT m.module, COUNT(*) AS n, AVG(m.mark) AS mean_mark FROM students AS s JOIN marks AS m ON s.student_id = m.student_id WHERE s.gender = 'female' GROUP BY m.module
