SELECT VAR(scholarship) AS v, STD(scholarship) AS s, VAR_POP(scholarship) AS vp, STDDEV_SAMP(scholarship) AS ss FROM students
