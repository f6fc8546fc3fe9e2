package main

import (
	"context"
	"errors"
	"os"

	jwtware "github.com/gofiber/contrib/jwt"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// serveBaseline runs one of the comparison servers in this process:
//
//	serve-static ADDR FILE                 a bare Fiber handler sending FILE's bytes, no JWT
//	serve-naive ADDR REDIS KEY SECRET      Fiber, contrib/jwt HS256 with its defaults, one GET of KEY per request
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
	default:
		return errors.New("usage: bench serve-static ADDR FILE | serve-naive ADDR REDIS KEY SECRET")
	}
	return app.Listen(args[0])
}
