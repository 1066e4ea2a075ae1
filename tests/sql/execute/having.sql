SELECT editor, COUNT(*) AS n FROM students GROUP BY editor HAVING COUNT(*) > 5 AND editor <> 'vim' ORDER BY n DESC
