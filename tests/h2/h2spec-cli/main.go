// Command h2spec: a minimal command line for the h2spec conformance suite
// (github.com/summerwind/h2spec), written for shardhttpd's tests because
// the source snapshot in ../shared/third_party/h2spec lacks its cmd/
// directory. Only the flags the tests use; standard library `flag`, so the
// build needs no cobra. Exit status 0 when every case passed, 1 otherwise.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/summerwind/h2spec"
	"github.com/summerwind/h2spec/config"
)

func main() {
	c := &config.Config{}
	var timeout int
	flag.StringVar(&c.Host, "h", "127.0.0.1", "target host")
	flag.IntVar(&c.Port, "p", 0, "target port (default 80, or 443 with -t)")
	flag.StringVar(&c.Path, "P", "/", "target path")
	flag.IntVar(&timeout, "o", 2, "time (seconds) to wait for each answer")
	flag.IntVar(&c.MaxHeaderLen, "max-header-length", 4000, "largest header value sent")
	flag.StringVar(&c.JUnitReport, "j", "", "write a JUnit XML report to this path")
	flag.BoolVar(&c.Strict, "S", false, "strict mode (also: -strict)")
	flag.BoolVar(&c.Strict, "strict", false, "strict mode")
	flag.BoolVar(&c.TLS, "t", false, "connect over TLS (ALPN h2)")
	flag.BoolVar(&c.Insecure, "k", false, "do not verify the server's certificate")
	flag.BoolVar(&c.Verbose, "v", false, "verbose output")
	flag.Parse()
	c.Timeout = time.Duration(timeout) * time.Second
	c.Sections = flag.Args()
	if c.Port == 0 {
		c.Port = 80
		if c.TLS {
			c.Port = 443
		}
	}
	ok, err := h2spec.Run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h2spec:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}
