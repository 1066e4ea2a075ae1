WITH __rows AS (
  SELECT
    __t."g" AS __k0,
    (
      CASE
        WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
        THEN NULL
        ELSE least(
          greatest(
            CAST(round(
              least(greatest(CAST(__t."v" AS DOUBLE), CAST('0.0' AS DOUBLE)), CAST('20.0' AS DOUBLE)) * CAST('67108864.0' AS DOUBLE)
            ) AS BIGINT),
            0
          ),
          1342177280
        )
      END
    ) AS __v0
  FROM "__deniable_1" AS __t
  WHERE
    (
      __t."g" IN ('x', 'y') OR __t."g" IS NULL
    )
)
SELECT
  0 AS __part,
  __k0,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(greatest(coalesce(count(*), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m0,
  CAST(least(greatest(coalesce(sum(__v0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m1,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __rows
GROUP BY
  __k0
