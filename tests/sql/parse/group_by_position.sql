SELECT gender, COUNT(*) FROM students GROUP BY 1
