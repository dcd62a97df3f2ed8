package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nops-dev/nops/agent/config"
)

// Image facts the config and the tests share.
const (
	imageTitle       = "Nops"
	imageDescription = "Continuous deployment of Nomad jobs from git, run as a Raft cluster."
	// createdBy is the history entry of the image's one layer.
	createdBy = "scripts/image: nops, CA bundle, passwd, group, /data, /etc/nops.d, /tmp"
)

// platformImage is the image of one platform.
type platformImage struct {
	platform platform
	image    v1.Image
}

// buildImages builds the image of every platform of opts.
func buildImages(opts *options) ([]platformImage, error) {
	caBundle, err := readCABundle(opts.caBundle)
	if err != nil {
		return nil, err
	}
	var out []platformImage
	for _, b := range opts.binaries {
		img, err := buildImage(opts, b, caBundle)
		if err != nil {
			return nil, err
		}
		out = append(out, platformImage{platform: b.platform, image: img})
	}
	return out, nil
}

// buildImage builds the image of one platform: one layer on scratch, and
// the config that runs nops serve as the nonroot user.
func buildImage(opts *options, b platformBinary, caBundle []byte) (v1.Image, error) {
	if err := checkBinary(b.path, b.platform); err != nil {
		return nil, err
	}
	binary, err := os.ReadFile(b.path)
	if err != nil {
		return nil, fmt.Errorf("binary for %s: %w", b.platform, err)
	}
	raw, err := layerTar(rootfsEntries(binary, caBundle), opts.created)
	if err != nil {
		return nil, fmt.Errorf("image for %s: %w", b.platform, err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("image for %s: layer: %w", b.platform, err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: opts.created}, CreatedBy: createdBy},
	})
	if err != nil {
		return nil, fmt.Errorf("image for %s: %w", b.platform, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image for %s: config: %w", b.platform, err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = b.platform.os, b.platform.arch
	cf.Created = v1.Time{Time: opts.created}
	cf.Config = imageConfig(opts)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image for %s: config: %w", b.platform, err)
	}
	return img, nil
}

// imageConfig is the run config of the image, the same on every platform.
func imageConfig(opts *options) v1.Config {
	port := func(p int, proto string) string { return strconv.Itoa(p) + "/" + proto }
	return v1.Config{
		User:       strconv.Itoa(nonrootID) + ":" + strconv.Itoa(nonrootID),
		WorkingDir: "/" + dataDir,
		Entrypoint: []string{"/" + binaryPath},
		Cmd:        []string{"serve"},
		// Settings by environment, so that `serve` with any flags keeps
		// the data and config directories; a flag still overrides them.
		Env: []string{
			"NOPS_DATA_DIR=/" + dataDir,
			"NOPS_CONFIG=/" + configDir,
		},
		ExposedPorts: map[string]struct{}{
			port(config.DefaultHTTPPort, "tcp"): {},
			port(config.DefaultRPCPort, "tcp"):  {},
			port(config.DefaultSerfPort, "tcp"): {},
			port(config.DefaultSerfPort, "udp"): {},
		},
		Volumes: map[string]struct{}{"/" + dataDir: {}},
		Labels:  imageLabels(opts),
	}
}

// imageLabels are the OCI annotation keys the image's config carries.
func imageLabels(opts *options) map[string]string {
	return map[string]string{
		"org.opencontainers.image.version":     opts.version,
		"org.opencontainers.image.revision":    opts.revision,
		"org.opencontainers.image.source":      opts.source,
		"org.opencontainers.image.licenses":    opts.licenses,
		"org.opencontainers.image.title":       imageTitle,
		"org.opencontainers.image.description": imageDescription,
		"org.opencontainers.image.created":     opts.created.Format(time.RFC3339),
	}
}
