SELECT gender, COUNT(DISTINCT editor) AS editors FROM students GROUP BY gender
