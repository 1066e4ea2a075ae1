WITH __l1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    CAST(least(greatest(coalesce(sum(__v0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __s0
  FROM (
    SELECT
      __t."uid" AS __u,
      (
        __j1."label"
      ) AS __k0,
      CAST(round(
        (
          CASE
            WHEN CAST(__t."v" AS DOUBLE PRECISION) IS NULL
            OR CAST(__t."v" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
            THEN NULL
            ELSE least(
              greatest(CAST(__t."v" AS DOUBLE PRECISION), CAST('0.0' AS DOUBLE PRECISION)),
              CAST('20.0' AS DOUBLE PRECISION)
            )
          END
        ) * CAST('16777216.0' AS DOUBLE PRECISION)
      ) AS BIGINT) AS __v0
    FROM "__deniable_0" AS __t
      INNER JOIN "__deniable_copy_4" AS __j1
        ON __t."g" = __j1."g"
    WHERE
      (
        __j1."label"
      ) IS NOT NULL AND __t."uid" IS NOT NULL
  ) AS __r
  GROUP BY
    __u,
    __k0
), __capped AS (
  SELECT
    *
  FROM __l1
), __heavy AS (
  SELECT
    __u,
    __k0
  FROM __capped
  WHERE
    __n > 3
), __hrows AS (
  SELECT
    __t."uid" AS __u,
    (
      __j1."label"
    ) AS __k0,
    CAST(round(
      (
        CASE
          WHEN CAST(__t."v" AS DOUBLE PRECISION) IS NULL
          OR CAST(__t."v" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
          THEN NULL
          ELSE least(
            greatest(CAST(__t."v" AS DOUBLE PRECISION), CAST('0.0' AS DOUBLE PRECISION)),
            CAST('20.0' AS DOUBLE PRECISION)
          )
        END
      ) * CAST('16777216.0' AS DOUBLE PRECISION)
    ) AS BIGINT) AS __v0
  FROM "__deniable_0" AS __t
    INNER JOIN "__deniable_copy_4" AS __j1
      ON __t."g" = __j1."g"
  WHERE
    __t."uid" IS NOT NULL
    AND EXISTS(
      SELECT
        1
      FROM __heavy AS __r
      WHERE
        __t."uid" IS NOT DISTINCT FROM __r.__u
        AND (
          __j1."label"
        ) IS NOT DISTINCT FROM __r.__k0
    )
), __hl1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    CAST(least(greatest(coalesce(sum(__v0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __s0
  FROM (
    SELECT
      *,
      row_number() OVER (
        PARTITION BY __u, __k0
        ORDER BY coalesce(
          hashtextextended(
            CAST(coalesce(
              hashtextextended(
                CAST(coalesce(
                  hashtextextended(
                    CAST(CAST(1 AS BIGINT) # coalesce(hashtextextended(CAST(__u AS TEXT), 0), 0) AS TEXT),
                    0
                  ),
                  0
                ) # coalesce(hashtextextended(CAST(__k0 AS TEXT), 0), 0) AS TEXT),
                0
              ),
              0
            ) # coalesce(hashtextextended(CAST(__v0 AS TEXT), 0), 0) AS TEXT),
            0
          ),
          0
        ), __v0
      ) AS __rn
    FROM __hrows
  ) AS __h
  WHERE
    __rn <= 3 AND __rn > 0
  GROUP BY
    __u,
    __k0
), __kept AS (
  SELECT
    __u,
    __k0,
    __n,
    __s0
  FROM __capped
  WHERE
    __n <= 3
  UNION ALL
  SELECT
    __u,
    __k0,
    __n,
    __s0
  FROM __hl1
)
SELECT
  0 AS __part,
  __k0,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(greatest(coalesce(sum(__n), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m0,
  CAST(least(greatest(coalesce(sum(__s0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m1,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
GROUP BY
  __k0
