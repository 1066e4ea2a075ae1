SELECT gender, COUNT(DISTINCT student_id) FROM students GROUP BY gender
