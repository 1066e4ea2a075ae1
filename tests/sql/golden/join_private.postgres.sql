WITH __l1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    CAST(least(
      greatest(coalesce(sum(coalesce(__v0 * 4 + 1, 0)), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __p0
  FROM (
    SELECT
      __t."uid" AS __u,
      __t."g" AS __k0,
      CAST(round(
        (
          CASE
            WHEN CAST((
              (
                CASE
                  WHEN CAST(__j1."w" AS DOUBLE PRECISION) IS NULL
                  OR CAST(__j1."w" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
                  THEN NULL
                  ELSE least(
                    greatest(CAST(__j1."w" AS DOUBLE PRECISION), CAST(0 AS DOUBLE PRECISION)),
                    CAST(5 AS DOUBLE PRECISION)
                  )
                END
              )
            ) AS DOUBLE PRECISION) IS NULL
            OR CAST((
              (
                CASE
                  WHEN CAST(__j1."w" AS DOUBLE PRECISION) IS NULL
                  OR CAST(__j1."w" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
                  THEN NULL
                  ELSE least(
                    greatest(CAST(__j1."w" AS DOUBLE PRECISION), CAST(0 AS DOUBLE PRECISION)),
                    CAST(5 AS DOUBLE PRECISION)
                  )
                END
              )
            ) AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
            THEN NULL
            ELSE least(
              greatest(
                CAST((
                  (
                    CASE
                      WHEN CAST(__j1."w" AS DOUBLE PRECISION) IS NULL
                      OR CAST(__j1."w" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
                      THEN NULL
                      ELSE least(
                        greatest(CAST(__j1."w" AS DOUBLE PRECISION), CAST(0 AS DOUBLE PRECISION)),
                        CAST(5 AS DOUBLE PRECISION)
                      )
                    END
                  )
                ) AS DOUBLE PRECISION),
                CAST('0.0' AS DOUBLE PRECISION)
              ),
              CAST('5.0' AS DOUBLE PRECISION)
            )
          END
        ) * CAST('134217728.0' AS DOUBLE PRECISION)
      ) AS BIGINT) AS __v0
    FROM "__deniable_0" AS __t
      INNER JOIN "__deniable_2" AS __j1
        ON __t."uid" = __j1."uid"
    WHERE
      (
        __t."g" IN ('x', 'y') OR __t."g" IS NULL
      ) AND __t."uid" IS NOT NULL
  ) AS __r
  GROUP BY
    __u,
    __k0
), __capped AS (
  SELECT
    __u,
    __k0,
    __n,
    __p0
  FROM (
    SELECT
      *,
      row_number() OVER (
        PARTITION BY __u
        ORDER BY coalesce(
          hashtextextended(
            CAST(coalesce(
              hashtextextended(
                CAST(CAST(2 AS BIGINT) # coalesce(hashtextextended(CAST(__u AS TEXT), 0), 0) AS TEXT),
                0
              ),
              0
            ) # coalesce(hashtextextended(CAST(__k0 AS TEXT), 0), 0) AS TEXT),
            0
          ),
          0
        ), __k0
      ) AS __pr
    FROM __l1
  ) AS __p
  WHERE
    __pr <= 2 AND __pr > 0
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
    __t."g" AS __k0,
    CAST(round(
      (
        CASE
          WHEN CAST((
            (
              CASE
                WHEN CAST(__j1."w" AS DOUBLE PRECISION) IS NULL
                OR CAST(__j1."w" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
                THEN NULL
                ELSE least(
                  greatest(CAST(__j1."w" AS DOUBLE PRECISION), CAST(0 AS DOUBLE PRECISION)),
                  CAST(5 AS DOUBLE PRECISION)
                )
              END
            )
          ) AS DOUBLE PRECISION) IS NULL
          OR CAST((
            (
              CASE
                WHEN CAST(__j1."w" AS DOUBLE PRECISION) IS NULL
                OR CAST(__j1."w" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
                THEN NULL
                ELSE least(
                  greatest(CAST(__j1."w" AS DOUBLE PRECISION), CAST(0 AS DOUBLE PRECISION)),
                  CAST(5 AS DOUBLE PRECISION)
                )
              END
            )
          ) AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
          THEN NULL
          ELSE least(
            greatest(
              CAST((
                (
                  CASE
                    WHEN CAST(__j1."w" AS DOUBLE PRECISION) IS NULL
                    OR CAST(__j1."w" AS DOUBLE PRECISION) = CAST('NaN' AS DOUBLE PRECISION)
                    THEN NULL
                    ELSE least(
                      greatest(CAST(__j1."w" AS DOUBLE PRECISION), CAST(0 AS DOUBLE PRECISION)),
                      CAST(5 AS DOUBLE PRECISION)
                    )
                  END
                )
              ) AS DOUBLE PRECISION),
              CAST('0.0' AS DOUBLE PRECISION)
            ),
            CAST('5.0' AS DOUBLE PRECISION)
          )
        END
      ) * CAST('134217728.0' AS DOUBLE PRECISION)
    ) AS BIGINT) AS __v0
  FROM "__deniable_0" AS __t
    INNER JOIN "__deniable_2" AS __j1
      ON __t."uid" = __j1."uid"
  WHERE
    __t."uid" IS NOT NULL
    AND EXISTS(
      SELECT
        1
      FROM __heavy AS __r
      WHERE
        __t."uid" IS NOT DISTINCT FROM __r.__u AND __t."g" IS NOT DISTINCT FROM __r.__k0
    )
), __hl1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    CAST(least(
      greatest(coalesce(sum(coalesce(__v0 * 4 + 1, 0)), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __p0
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
    (
      __p0 & 3
    ) AS __c0,
    (
      __p0 >> 2
    ) AS __s0
  FROM __capped
  WHERE
    __n <= 3
  UNION ALL
  SELECT
    __u,
    __k0,
    __n,
    (
      __p0 & 3
    ) AS __c0,
    (
      __p0 >> 2
    ) AS __s0
  FROM __hl1
)
SELECT
  0 AS __part,
  __k0,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(greatest(coalesce(sum(__n), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m0,
  CAST(least(greatest(coalesce(sum(__c0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m1,
  CAST(least(
    greatest(coalesce((
      sum(__s0) - 335544320 * sum(__c0)
    ), 0), -4611686018427387903),
    4611686018427387903
  ) AS BIGINT) AS __m_m2,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
GROUP BY
  __k0
