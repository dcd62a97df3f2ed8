package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// The user the image runs as: the conventional "nonroot" ids, which no
// distribution gives to a real account.
const (
	nonrootID   = 65532
	nonrootName = "nops"
)

// Paths inside the image.
const (
	binaryPath   = "nops"
	caBundlePath = "etc/ssl/certs/ca-certificates.crt"
	dataDir      = "data"
	configDir    = "etc/nops.d"
)

// rootfsEntry is one file or directory of the image's filesystem.
type rootfsEntry struct {
	name     string // relative, without a leading slash; directories end in "/"
	mode     int64  // permission bits, and c_ISVTX for the sticky bit
	uid, gid int
	body     []byte // nil for a directory
}

// rootfsEntries lists the image's filesystem, parents before children, in
// the order of the layer: the same inputs give the same layer.
func rootfsEntries(binary, caBundle []byte) []rootfsEntry {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/%s:/sbin/nologin\n",
		nonrootName, nonrootID, nonrootID, nonrootName, dataDir)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", nonrootName, nonrootID)
	return []rootfsEntry{
		{name: dataDir + "/", mode: 0o750, uid: nonrootID, gid: nonrootID},
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: configDir + "/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: caBundlePath, mode: 0o644, body: caBundle},
		{name: binaryPath, mode: 0o755, body: binary},
		{name: "tmp/", mode: 0o1777},
	}
}

// layerTar writes entries as an uncompressed tar, every time set to
// modTime and every header field fixed, so it is the same byte for byte
// for the same entries.
func layerTar(entries []rootfsEntry, modTime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: modTime,
			Format:  tar.FormatPAX,
		}
		if e.body == nil {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// readCABundle reads the CA bundle the image trusts; a missing or empty
// bundle is an error that says where one comes from.
func readCABundle(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CA bundle %s does not exist: install the ca-certificates package, or give another with -ca-bundle", path)
	}
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if !bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return b, nil
}
