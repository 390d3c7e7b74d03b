package checkpoint

import (
	"context"
	"fmt"

	"google.golang.org/api/option"

	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// Keys of a storage Secret (spec.checkpoint.storage.secretRef).
const (
	SecretS3AccessKey = "AWS_ACCESS_KEY_ID"
	SecretS3SecretKey = "AWS_SECRET_ACCESS_KEY"
	SecretGCSKey      = "service-account.json"
)

// Open opens the store a storage spec names. secret holds the Secret's data when secretRef is set
// (else the environment's identity is used); mountDir is where a pvc or nfs volume is mounted.
func Open(ctx context.Context, st *mlv1.CheckpointStorage, secret map[string][]byte, mountDir string) (Store, error) {
	switch st.Type {
	case mlv1.StoragePVC, mlv1.StorageNFS:
		if mountDir == "" {
			return nil, fmt.Errorf("%s storage needs its volume mounted", st.Type)
		}
		return DirStore{Root: mountDir}, nil
	case mlv1.StorageS3:
		o := S3Options{Bucket: st.S3Bucket, Region: st.Region, Endpoint: st.Endpoint}
		if secret != nil {
			o.AccessKey, o.SecretKey = string(secret[SecretS3AccessKey]), string(secret[SecretS3SecretKey])
			if o.AccessKey == "" || o.SecretKey == "" {
				return nil, fmt.Errorf("the storage secret lacks %s or %s", SecretS3AccessKey, SecretS3SecretKey)
			}
		}
		return NewS3Store(ctx, o)
	case mlv1.StorageGCS:
		var opts []option.ClientOption
		if secret != nil {
			key, ok := secret[SecretGCSKey]
			if !ok {
				return nil, fmt.Errorf("the storage secret lacks %s", SecretGCSKey)
			}
			opts = append(opts, option.WithAuthCredentialsJSON(option.ServiceAccount, key))
		}
		return NewGCSStore(ctx, st.GCSBucket, opts...)
	}
	return nil, fmt.Errorf("unknown storage type %q", st.Type)
}
