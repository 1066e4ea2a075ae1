WITH __l1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    CAST(least(
      greatest(coalesce(sum(coalesce(__v0 * 65536 + 1, 0)), 0), -4611686018427387903),
      4611686018427387903
    ) AS BIGINT) AS __p0
  FROM (
    SELECT
      __t."uid" AS __u,
      __t."g" AS __k0,
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
              CAST(round(
                least(
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
                ) * CAST('134217728.0' AS DOUBLE PRECISION)
              ) AS BIGINT),
              0
            ),
            671088640
          )
        END
      ) AS __v0
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
        ORDER BY hashint8extended(
          hashint8extended(CAST(2 AS BIGINT) # coalesce(hashtextextended(CAST(__u AS TEXT), 0), 0), 0) # coalesce(hashtextextended(CAST(__k0 AS TEXT), 0), 0),
          0
        ), __k0
      ) AS __pr
    FROM __l1
  ) AS __p
  WHERE
    __pr <= 2 AND __pr > 0
), __giant AS (
  SELECT
    __u,
    __k0,
    __n
  FROM __capped
  WHERE
    __n >= 65536
), __grows AS (
  SELECT
    __t."uid" AS __u,
    __t."g" AS __k0,
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
            CAST(round(
              least(
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
              ) * CAST('134217728.0' AS DOUBLE PRECISION)
            ) AS BIGINT),
            0
          ),
          671088640
        )
      END
    ) AS __v0
  FROM "__deniable_0" AS __t
    INNER JOIN "__deniable_2" AS __j1
      ON __t."uid" = __j1."uid"
  WHERE
    __t."uid" IS NOT NULL
    AND EXISTS(
      SELECT
        1
      FROM __giant AS __r
      WHERE
        __t."uid" IS NOT DISTINCT FROM __r.__u AND __t."g" IS NOT DISTINCT FROM __r.__k0
    )
), __gl1 AS (
  SELECT
    __u,
    __k0,
    count(*) AS __n,
    count(__v0) AS __c0,
    CAST(least(greatest(coalesce(sum(__v0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __s0
  FROM __grows
  GROUP BY
    __u,
    __k0
), __totals AS (
  SELECT
    __u,
    __k0,
    __n,
    (
      __p0 & 65535
    ) AS __c0,
    (
      __p0 >> 16
    ) AS __s0
  FROM __capped
  WHERE
    NOT __n >= 65536
  UNION ALL
  SELECT
    __g.__u,
    __g.__k0,
    __c.__n,
    __g.__c0,
    __g.__s0
  FROM __gl1 AS __g
  INNER JOIN __giant AS __c
    ON __g.__u IS NOT DISTINCT FROM __c.__u AND __g.__k0 IS NOT DISTINCT FROM __c.__k0
), __kept AS (
  SELECT
    __u,
    __k0,
    least(__n, 3) AS __n,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y0 * 3
            ) >= 0
            THEN div((
              2 * (
                __y0 * 3
              ) + __n
            ), (
              2 * __n
            ))
            ELSE -(
              div((
                __n - 2 * (
                  __y0 * 3
                )
              ), (
                2 * __n
              ))
            )
          END
          ELSE __y0
        END,
        0
      ),
      3
    ) AS BIGINT) AS __x0,
    CAST(least(
      greatest(
        CASE
          WHEN __n > 3
          THEN CASE
            WHEN (
              __y1 * 3
            ) >= 0
            THEN div((
              2 * (
                __y1 * 3
              ) + __n
            ), (
              2 * __n
            ))
            ELSE -(
              div((
                __n - 2 * (
                  __y1 * 3
                )
              ), (
                2 * __n
              ))
            )
          END
          ELSE __y1
        END,
        -1006632960
      ),
      1006632960
    ) AS BIGINT) AS __x1
  FROM (
    SELECT
      __u,
      __k0,
      __n,
      CAST(__c0 AS DECIMAL(38, 0)) AS __y0,
      (
        CAST(__s0 AS DECIMAL(38, 0)) - 335544320 * CAST(__c0 AS DECIMAL(38, 0))
      ) AS __y1
    FROM __totals
  ) AS __w
)
SELECT
  0 AS __part,
  __k0,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(greatest(coalesce(sum(__n), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m0,
  CAST(least(greatest(coalesce(sum(__x0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m1,
  CAST(least(greatest(coalesce(sum(__x1), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m2,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
GROUP BY
  __k0
