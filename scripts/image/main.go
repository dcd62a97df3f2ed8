// Command image builds the Nops container image without a container
// daemon, for `make image`.
//
// The image is built from scratch, one per platform (linux/amd64 and
// linux/arm64), each of one layer holding the static nops binary (/nops),
// the CA bundle of the build machine, /etc/passwd and /etc/group with the
// user nops (uid and gid 65532), the data directory /data owned by that
// user, and /tmp. Its config runs /nops serve as that user, with the data
// directory /data and the config directory /etc/nops.d (through
// NOPS_DATA_DIR and NOPS_CONFIG, so any serve arguments keep them), exposes
// the API, RPC and serf ports, and carries the OCI labels (version,
// revision, source, licence, title, description, created).
//
// The output is one tar archive holding an OCI image layout whose
// index.json names an image index of both platforms, tagged with the
// version; the archive also holds a manifest.json of the Docker archive
// format, so `docker load` of a Docker without the containerd image store
// loads it as well (one image per platform, tagged <repository>:<version>-<arch>).
//
// The build is reproducible: every file time is -created (the commit's
// date), every owner and mode is fixed, and the archive's entries are in
// a fixed order, so the same binaries and inputs give the same archive,
// byte for byte, and the same digests. A binary that is not a static
// executable of its platform is refused, naming it.
//
// Usage:
//
//	go run ./scripts/image -version 1.2.3 -revision <commit> -created <RFC 3339 time> \
//	    -binary linux/amd64=bin/linux_amd64/nops -binary linux/arm64=bin/linux_arm64/nops \
//	    -out dist/nops_1.2.3_oci.tar
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Defaults of the image's labels and names.
const (
	defaultRepository = "ghcr.io/nops-dev/nops"
	defaultSource     = "https://github.com/nops-dev/nops"
	defaultLicenses   = "MPL-2.0"
	defaultCABundle   = "/etc/ssl/certs/ca-certificates.crt"
)

// options are the inputs of one build.
type options struct {
	version    string
	revision   string
	created    time.Time
	source     string
	licenses   string
	repository string
	caBundle   string
	// binaries maps each platform ("linux/amd64") to its nops binary, in
	// the order the platforms were given.
	binaries []platformBinary
	out      string
}

// platformBinary is the nops binary of one platform.
type platformBinary struct {
	platform platform
	path     string
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// run builds the image archive that args describe and prints what it
// wrote to stdout.
func run(args []string, stdout io.Writer) error {
	opts, err := parseArgs(args)
	if err != nil {
		return err
	}
	images, err := buildImages(opts)
	if err != nil {
		return err
	}
	sum, err := writeArchive(opts, images)
	if err != nil {
		return err
	}
	return sum.print(stdout, opts.out)
}

// parseArgs reads the flags; every missing or malformed one is an error
// that names it.
func parseArgs(args []string) (*options, error) {
	opts := &options{}
	var created string
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&opts.version, "version", "", "Version of the image: its label and tag (required).")
	fs.StringVar(&opts.revision, "revision", "", "Commit the binaries were built from (required).")
	fs.StringVar(&created, "created", "", "Creation time, RFC 3339: the commit's date, for a reproducible image (required).")
	fs.StringVar(&opts.source, "source", defaultSource, "Source repository URL (label).")
	fs.StringVar(&opts.licenses, "licenses", defaultLicenses, "SPDX licence expression (label).")
	fs.StringVar(&opts.repository, "repository", defaultRepository, "Image repository the tags name.")
	fs.StringVar(&opts.caBundle, "ca-bundle", defaultCABundle, "CA certificate bundle copied into the image.")
	fs.StringVar(&opts.out, "out", "", "Path of the archive to write (required).")
	fs.Func("binary", "os/arch=path of the static nops binary of a platform (repeatable).", func(s string) error {
		b, err := parseBinary(s)
		if err != nil {
			return err
		}
		for _, have := range opts.binaries {
			if have.platform == b.platform {
				return fmt.Errorf("platform %s given twice", b.platform)
			}
		}
		opts.binaries = append(opts.binaries, b)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, req := range []struct{ name, value string }{
		{"version", opts.version}, {"revision", opts.revision}, {"created", created}, {"out", opts.out},
	} {
		if strings.TrimSpace(req.value) == "" {
			return nil, fmt.Errorf("flag -%s is required", req.name)
		}
	}
	if len(opts.binaries) == 0 {
		return nil, fmt.Errorf("flag -binary is required: give os/arch=path for each platform")
	}
	if strings.ContainsAny(opts.version, "/: \t") {
		return nil, fmt.Errorf("flag -version %q: not usable as an image tag", opts.version)
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return nil, fmt.Errorf("flag -created: %w", err)
	}
	opts.created = t.UTC().Truncate(time.Second)
	return opts, nil
}

// parseBinary reads one -binary value, os/arch=path.
func parseBinary(s string) (platformBinary, error) {
	name, path, ok := strings.Cut(s, "=")
	if !ok || path == "" {
		return platformBinary{}, fmt.Errorf("%q: want os/arch=path", s)
	}
	p, err := parsePlatform(name)
	if err != nil {
		return platformBinary{}, err
	}
	return platformBinary{platform: p, path: path}, nil
}
