package main

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	jwtware "github.com/gofiber/contrib/jwt"
	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// serveBaseline runs one of the comparison servers in this process:
//
//	serve-static ADDR FILE                 a bare Fiber handler sending FILE's bytes, no JWT
//	serve-naive ADDR REDIS KEY SECRET      Fiber, contrib/jwt HS256 with its defaults, one GET of KEY per request
//	serve-naive-longtail ADDR REDIS PREFIX SECRET DBURL
//	                                       the same, GET of PREFIX+id; on a miss the document from PostgreSQL
//	                                       (a pool of 16, as the gateway's), then SET for 5 minutes (the gateway's TTL);
//	                                       GET /_stats (no JWT) counts hits and misses
func serveBaseline(mode string, args []string) error {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	switch {
	case mode == "serve-static" && len(args) == 2:
		body, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		app.Get("/realty/:ref", func(c *fiber.Ctx) error {
			c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
			c.Set(fiber.HeaderCacheControl, "public, max-age=3600") // for Varnish in front
			return c.Send(body)
		})
	case mode == "serve-naive" && len(args) == 4:
		rdb := redis.NewClient(&redis.Options{Addr: args[1]})
		key := args[2]
		app.Use(jwtware.New(jwtware.Config{SigningKey: jwtware.SigningKey{JWTAlg: "HS256", Key: []byte(args[3])}}))
		app.Get("/realty/:ref", func(c *fiber.Ctx) error {
			b, err := rdb.Get(context.Background(), key).Bytes()
			if err != nil {
				return err
			}
			c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
			return c.Send(b)
		})
	case mode == "serve-naive-longtail" && len(args) == 5:
		rdb := redis.NewClient(&redis.Options{Addr: args[1]})
		prefix := args[2]
		cfg, err := pgxpool.ParseConfig(args[4])
		if err != nil {
			return err
		}
		cfg.MaxConns = 16
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			return err
		}
		var hits, misses atomic.Uint64
		app.Get("/_stats", func(c *fiber.Ctx) error {
			return c.JSON(naiveStats{Hits: hits.Load(), Misses: misses.Load()})
		})
		app.Use(jwtware.New(jwtware.Config{SigningKey: jwtware.SigningKey{JWTAlg: "HS256", Key: []byte(args[3])}}))
		app.Get("/realty/:id", func(c *fiber.Ctx) error {
			id, err := strconv.ParseInt(c.Params("id"), 10, 64)
			if err != nil {
				return fiber.ErrBadRequest
			}
			ctx, key := context.Background(), prefix+strconv.FormatInt(id, 10)
			b, err := rdb.Get(ctx, key).Bytes()
			switch {
			case err == nil:
				hits.Add(1)
			case errors.Is(err, redis.Nil):
				misses.Add(1)
				err := pool.QueryRow(ctx, `SELECT document FROM listings WHERE id = $1 AND is_active AND NOT deleted`, id).Scan(&b)
				if errors.Is(err, pgx.ErrNoRows) {
					return fiber.ErrNotFound
				} else if err != nil {
					return err
				}
				if err := rdb.Set(ctx, key, b, 5*time.Minute).Err(); err != nil {
					return err
				}
			default:
				return err
			}
			c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
			return c.Send(b)
		})
	default:
		return errors.New("usage: bench serve-static ADDR FILE | serve-naive ADDR REDIS KEY SECRET | serve-naive-longtail ADDR REDIS PREFIX SECRET DBURL")
	}
	return app.Listen(args[0])
}

// naiveStats is what serve-naive-longtail answers on /_stats.
type naiveStats struct {
	Hits   uint64 `json:"hits"`
	Misses uint64 `json:"misses"`
}
