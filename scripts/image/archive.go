package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the image index in the layout's index.json: the tag
// (OCI) and the full name (containerd, and Docker with the containerd
// image store) that a load gives the image.
const (
	annotationRefName   = "org.opencontainers.image.ref.name"
	annotationImageName = "io.containerd.image.name"
)

// dockerManifestEntry is one image of the manifest.json of a Docker
// archive, which `docker load` reads.
type dockerManifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// summary is what one build wrote, for the person who ran it.
type summary struct {
	indexDigest v1.Hash
	platforms   []platformSummary
	tarSize     int64
	tarSHA256   string
}

type platformSummary struct {
	platform       platform
	manifestDigest v1.Hash
	layerSize      int64
}

// writeArchive writes the images of opts as an OCI image layout, adds the
// Docker manifest.json, and tars it to opts.out.
func writeArchive(opts *options, images []platformImage) (*summary, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, pi := range images {
		adds = append(adds, mutate.IndexAddendum{Add: pi.image, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: pi.platform.os, Architecture: pi.platform.arch},
		}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	top := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: idx, Descriptor: v1.Descriptor{
		Annotations: map[string]string{
			annotationRefName:   opts.version,
			annotationImageName: opts.repository + ":" + opts.version,
		},
	}})

	dir, err := os.MkdirTemp("", "nops-image-")
	if err != nil {
		return nil, fmt.Errorf("image layout: %w", err)
	}
	defer os.RemoveAll(dir)
	if _, err := layout.Write(dir, top); err != nil {
		return nil, fmt.Errorf("image layout: %w", err)
	}
	sum, entries, err := describe(opts, idx, images)
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal(entries)
	if err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if sum.tarSize, sum.tarSHA256, err = tarDir(dir, opts.out, opts.created); err != nil {
		return nil, err
	}
	return sum, nil
}

// describe gathers the digests and sizes of the build and the Docker
// manifest.json entries, one image per platform, tagged with its arch.
func describe(opts *options, idx v1.ImageIndex, images []platformImage) (*summary, []dockerManifestEntry, error) {
	sum := &summary{}
	var err error
	if sum.indexDigest, err = idx.Digest(); err != nil {
		return nil, nil, fmt.Errorf("image index: %w", err)
	}
	var entries []dockerManifestEntry
	for _, pi := range images {
		m, err := pi.image.Manifest()
		if err != nil {
			return nil, nil, fmt.Errorf("image for %s: %w", pi.platform, err)
		}
		d, err := pi.image.Digest()
		if err != nil {
			return nil, nil, fmt.Errorf("image for %s: %w", pi.platform, err)
		}
		ps := platformSummary{platform: pi.platform, manifestDigest: d}
		e := dockerManifestEntry{
			Config:   blobPath(m.Config.Digest),
			RepoTags: []string{opts.repository + ":" + opts.version + "-" + pi.platform.arch},
		}
		for _, l := range m.Layers {
			e.Layers = append(e.Layers, blobPath(l.Digest))
			ps.layerSize += l.Size
		}
		entries = append(entries, e)
		sum.platforms = append(sum.platforms, ps)
	}
	return sum, entries, nil
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// tarDir writes the files under dir to out as a tar whose entries are in
// lexical order with fixed owners, modes and times, and returns its size
// and SHA-256. It writes a temporary file beside out and renames it, so
// out is never half written.
func tarDir(dir, out string, modTime time.Time) (int64, string, error) {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return 0, "", fmt.Errorf("archive: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(out), ".nops-image-*.tar")
	if err != nil {
		return 0, "", fmt.Errorf("archive: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		return addFile(tw, path, filepath.ToSlash(rel), d.IsDir(), modTime)
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Close()
	}
	if err == nil {
		err = os.Rename(f.Name(), out)
	}
	if err != nil {
		return 0, "", fmt.Errorf("archive %s: %w", out, err)
	}
	return cw.n, hex.EncodeToString(h.Sum(nil)), nil
}

// addFile writes one file or directory of the layout to tw.
func addFile(tw *tar.Writer, path, name string, isDir bool, modTime time.Time) error {
	hdr := &tar.Header{Name: name, Mode: 0o644, ModTime: modTime, Format: tar.FormatPAX, Typeflag: tar.TypeReg}
	if isDir {
		hdr.Name += "/"
		hdr.Mode = 0o755
		hdr.Typeflag = tar.TypeDir
		return tw.WriteHeader(hdr)
	}
	src, err := os.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	hdr.Size = info.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// print writes the summary: the archive, the index digest (the digest of
// the image as pushed), and each platform's manifest digest and
// compressed layer size.
func (s *summary) print(w io.Writer, out string) error {
	if _, err := fmt.Fprintf(w, "%s\t%d bytes\tsha256:%s\nindex\t%s\n", out, s.tarSize, s.tarSHA256, s.indexDigest); err != nil {
		return err
	}
	for _, p := range s.platforms {
		if _, err := fmt.Fprintf(w, "%s\t%s\tlayer %d bytes\n", p.platform, p.manifestDigest, p.layerSize); err != nil {
			return err
		}
	}
	return nil
}
