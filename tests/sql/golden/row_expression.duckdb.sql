WITH __l1 AS (
  SELECT
    __u,
    count(*) AS __n,
    CAST(least(greatest(coalesce(sum(__v0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __s0,
    count(__v2) AS __c2,
    CAST(least(greatest(coalesce(sum(__v1), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __s1
  FROM (
    SELECT
      __t."uid" AS __u,
      CAST(round(
        (
          CASE
            WHEN CAST((
              try(
                (
                  CASE
                    WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                    THEN NULL
                    ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                  END
                ) * (
                  CASE WHEN __t."q" IS NULL THEN NULL ELSE least(greatest(__t."q", 0), 10) END
                )
              )
            ) AS DOUBLE) IS NULL
            OR isnan(
              CAST((
                try(
                  (
                    CASE
                      WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                      THEN NULL
                      ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                    END
                  ) * (
                    CASE WHEN __t."q" IS NULL THEN NULL ELSE least(greatest(__t."q", 0), 10) END
                  )
                )
              ) AS DOUBLE)
            )
            THEN NULL
            ELSE least(
              greatest(
                CAST((
                  try(
                    (
                      CASE
                        WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                        THEN NULL
                        ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                      END
                    ) * (
                      CASE WHEN __t."q" IS NULL THEN NULL ELSE least(greatest(__t."q", 0), 10) END
                    )
                  )
                ) AS DOUBLE),
                CAST('0.0' AS DOUBLE)
              ),
              CAST('200.0' AS DOUBLE)
            )
          END
        ) * CAST('2097152.0' AS DOUBLE)
      ) AS BIGINT) AS __v0,
      CAST(round(
        (
          CASE
            WHEN CAST((
              try(
                CASE
                  WHEN __t."q" > 1
                  THEN (
                    CASE
                      WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                      THEN NULL
                      ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                    END
                  )
                  ELSE 0
                END
              )
            ) AS DOUBLE) IS NULL
            OR isnan(
              CAST((
                try(
                  CASE
                    WHEN __t."q" > 1
                    THEN (
                      CASE
                        WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                        THEN NULL
                        ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                      END
                    )
                    ELSE 0
                  END
                )
              ) AS DOUBLE)
            )
            THEN NULL
            ELSE least(
              greatest(
                CAST((
                  try(
                    CASE
                      WHEN __t."q" > 1
                      THEN (
                        CASE
                          WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                          THEN NULL
                          ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                        END
                      )
                      ELSE 0
                    END
                  )
                ) AS DOUBLE),
                CAST('0.0' AS DOUBLE)
              ),
              CAST('20.0' AS DOUBLE)
            )
          END
        ) * CAST('33554432.0' AS DOUBLE)
      ) AS BIGINT) AS __v1,
      (
        CASE
          WHEN isnan(CAST((
            try(CASE WHEN __t."v" > 1 THEN 1 END)
          ) AS DOUBLE))
          THEN NULL
          ELSE CAST((
            try(CASE WHEN __t."v" > 1 THEN 1 END)
          ) AS DOUBLE)
        END
      ) AS __v2
    FROM "__deniable_0" AS __t
    WHERE
      __t."uid" IS NOT NULL
  ) AS __r
  GROUP BY
    __u
), __capped AS (
  SELECT
    *
  FROM __l1
), __heavy AS (
  SELECT
    __u
  FROM __capped
  WHERE
    __n > 3
), __hrows AS (
  SELECT
    __t."uid" AS __u,
    CAST(round(
      (
        CASE
          WHEN CAST((
            try(
              (
                CASE
                  WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                  THEN NULL
                  ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                END
              ) * (
                CASE WHEN __t."q" IS NULL THEN NULL ELSE least(greatest(__t."q", 0), 10) END
              )
            )
          ) AS DOUBLE) IS NULL
          OR isnan(
            CAST((
              try(
                (
                  CASE
                    WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                    THEN NULL
                    ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                  END
                ) * (
                  CASE WHEN __t."q" IS NULL THEN NULL ELSE least(greatest(__t."q", 0), 10) END
                )
              )
            ) AS DOUBLE)
          )
          THEN NULL
          ELSE least(
            greatest(
              CAST((
                try(
                  (
                    CASE
                      WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                      THEN NULL
                      ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                    END
                  ) * (
                    CASE WHEN __t."q" IS NULL THEN NULL ELSE least(greatest(__t."q", 0), 10) END
                  )
                )
              ) AS DOUBLE),
              CAST('0.0' AS DOUBLE)
            ),
            CAST('200.0' AS DOUBLE)
          )
        END
      ) * CAST('2097152.0' AS DOUBLE)
    ) AS BIGINT) AS __v0,
    CAST(round(
      (
        CASE
          WHEN CAST((
            try(
              CASE
                WHEN __t."q" > 1
                THEN (
                  CASE
                    WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                    THEN NULL
                    ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                  END
                )
                ELSE 0
              END
            )
          ) AS DOUBLE) IS NULL
          OR isnan(
            CAST((
              try(
                CASE
                  WHEN __t."q" > 1
                  THEN (
                    CASE
                      WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                      THEN NULL
                      ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                    END
                  )
                  ELSE 0
                END
              )
            ) AS DOUBLE)
          )
          THEN NULL
          ELSE least(
            greatest(
              CAST((
                try(
                  CASE
                    WHEN __t."q" > 1
                    THEN (
                      CASE
                        WHEN CAST(__t."v" AS DOUBLE) IS NULL OR isnan(CAST(__t."v" AS DOUBLE))
                        THEN NULL
                        ELSE least(greatest(CAST(__t."v" AS DOUBLE), CAST(0 AS DOUBLE)), CAST(20 AS DOUBLE))
                      END
                    )
                    ELSE 0
                  END
                )
              ) AS DOUBLE),
              CAST('0.0' AS DOUBLE)
            ),
            CAST('20.0' AS DOUBLE)
          )
        END
      ) * CAST('33554432.0' AS DOUBLE)
    ) AS BIGINT) AS __v1,
    (
      CASE
        WHEN isnan(CAST((
          try(CASE WHEN __t."v" > 1 THEN 1 END)
        ) AS DOUBLE))
        THEN NULL
        ELSE CAST((
          try(CASE WHEN __t."v" > 1 THEN 1 END)
        ) AS DOUBLE)
      END
    ) AS __v2
  FROM "__deniable_0" AS __t
  SEMI JOIN __heavy AS __r
    ON __t."uid" IS NOT DISTINCT FROM __r.__u
  WHERE
    __t."uid" IS NOT NULL
), __hl1 AS (
  SELECT
    __u,
    count(*) AS __n,
    CAST(least(greatest(coalesce(sum(__v0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __s0,
    count(__v2) AS __c2,
    CAST(least(greatest(coalesce(sum(__v1), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __s1
  FROM (
    SELECT
      *,
      row_number() OVER (
        PARTITION BY __u
        ORDER BY hash(
          xor(
            hash(xor(hash(xor(hash(xor(CAST(1 AS UBIGINT), hash(__u))), hash(__v0))), hash(__v1))),
            hash(__v2)
          )
        ), __v0, __v1, __v2
      ) AS __rn
    FROM __hrows
  ) AS __h
  WHERE
    __rn <= 3 AND __rn > 0
  GROUP BY
    __u
), __kept AS (
  SELECT
    __u,
    __n,
    __s0,
    __c2,
    __s1
  FROM __capped
  WHERE
    __n <= 3
  UNION ALL
  SELECT
    __u,
    __n,
    __s0,
    __c2,
    __s1
  FROM __hl1
)
SELECT
  0 AS __part,
  CAST(count(*) AS BIGINT) AS __units,
  CAST(least(greatest(coalesce(sum(__s0), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m0,
  CAST(least(greatest(coalesce(sum(__c2), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m1,
  CAST(least(greatest(coalesce(sum(__s1), 0), -4611686018427387903), 4611686018427387903) AS BIGINT) AS __m_m2,
  CAST(NULL AS BIGINT) AS __bin,
  CAST(NULL AS BIGINT) AS __count
FROM __kept
