// Package functionstore keeps tenants' WebAssembly modules in a JetStream object store,
// each under the hex SHA-256 of its bytes. The name is the content, so a put is idempotent,
// two tenants uploading the same module share one object, and an edge that fetches a
// module by the digest a route names checks what it got against that name.
package functionstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/infra/natsconn"
)

// ErrNotFound: the store holds no module by that digest.
var ErrNotFound = errors.New("functionstore: module not found")

// ErrCorrupt: the bytes the store returned do not hash to their name.
var ErrCorrupt = errors.New("functionstore: module does not match its sha256")

// BucketName is the object store of natsPrefix's deployment.
func BucketName(natsPrefix string) string { return natsPrefix + "_functions" }

// Store is one bucket of modules.
type Store struct {
	obs    jetstream.ObjectStore
	bucket string
}

// Open creates the bucket or brings it to these settings: file storage, replicas copies
// (raised on an existing bucket, never lowered: see natsconn.Replicas).
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*Store, error) {
	// JetStream keeps an object store in the stream "OBJ_<bucket>".
	r, err := natsconn.Replicas(ctx, js, "OBJ_"+bucket, replicas)
	if err != nil {
		return nil, fmt.Errorf("functionstore: open %s: %w", bucket, err)
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      bucket,
		Description: "Tollgate tenants' WebAssembly modules, named by the hex sha256 of their bytes",
		Storage:     jetstream.FileStorage,
		Replicas:    r,
	})
	if err != nil {
		return nil, fmt.Errorf("functionstore: open %s: %w", bucket, err)
	}
	return &Store{obs: obs, bucket: bucket}, nil
}

// Bucket is the store's bucket name.
func (s *Store) Bucket() string { return s.bucket }

// Digest is the name a module is stored under.
func Digest(module []byte) string {
	sum := sha256.Sum256(module)
	return hex.EncodeToString(sum[:])
}

// ValidDigest reports whether name has the shape of a digest: 64 lowercase hex digits.
func ValidDigest(name string) bool {
	if len(name) != 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Put stores module under its digest and returns the digest. A module already stored
// with the same size is not written again: its name is its content.
func (s *Store) Put(ctx context.Context, module []byte) (string, error) {
	name := Digest(module)
	info, err := s.obs.GetInfo(ctx, name)
	if err == nil && !info.Deleted && info.Size == uint64(len(module)) {
		return name, nil
	}
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return "", fmt.Errorf("functionstore: put %s: %w", name, err)
	}
	if _, err := s.obs.PutBytes(ctx, name, module); err != nil {
		return "", fmt.Errorf("functionstore: put %s: %w", name, err)
	}
	return name, nil
}

// Has reports whether the store holds the module named sha256hex.
func (s *Store) Has(ctx context.Context, sha256hex string) (bool, error) {
	if !ValidDigest(sha256hex) {
		return false, nil
	}
	info, err := s.obs.GetInfo(ctx, sha256hex)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("functionstore: info %s: %w", sha256hex, err)
	}
	return !info.Deleted, nil
}

// Get returns the module named sha256hex, having checked that its bytes hash to that
// name (ErrCorrupt otherwise); ErrNotFound when the store does not hold it.
func (s *Store) Get(ctx context.Context, sha256hex string) ([]byte, error) {
	if !ValidDigest(sha256hex) {
		return nil, ErrNotFound
	}
	b, err := s.obs.GetBytes(ctx, sha256hex)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("functionstore: get %s: %w", sha256hex, err)
	}
	if Digest(b) != sha256hex {
		return nil, fmt.Errorf("%w: %s", ErrCorrupt, sha256hex)
	}
	return b, nil
}

// Delete removes the module named sha256hex; deleting one the store does not hold is
// not an error.
func (s *Store) Delete(ctx context.Context, sha256hex string) error {
	if !ValidDigest(sha256hex) {
		return nil
	}
	err := s.obs.Delete(ctx, sha256hex)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("functionstore: delete %s: %w", sha256hex, err)
	}
	return nil
}
