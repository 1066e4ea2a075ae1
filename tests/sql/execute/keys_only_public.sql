SELECT editor FROM students GROUP BY editor
