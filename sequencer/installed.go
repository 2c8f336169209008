package sequencer

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// InstalledConfigMap is the name of the ConfigMap, in the sequencer's namespace, that records the
// installed version for the next plan's policy checks. An administrator creates it with the
// version key before the first plan; every successful plan rewrites it.
const InstalledConfigMap = "upgrade-repo-installed"

// Keys of InstalledConfigMap.
const (
	// InstalledVersionKey holds the installed version (v1.5.2).
	InstalledVersionKey = "version"
	// InstalledReleaseKey holds the installed release's metadata as JSON, when known.
	InstalledReleaseKey = "release"
	// InstalledPlanKey names the plan that installed it.
	InstalledPlanKey = "plan"
)

// Installed is what InstalledConfigMap records.
type Installed struct {
	// Version is the installed version; empty when unknown.
	Version string
	// Release is the installed release's metadata; nil when unknown.
	Release *release.Release
}

// ReadInstalled reads InstalledConfigMap from namespace. A missing ConfigMap is not an error: it
// returns an empty Installed.
func ReadInstalled(ctx context.Context, r client.Reader, namespace string) (Installed, error) {
	var cm corev1.ConfigMap
	err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: InstalledConfigMap}, &cm)
	if apierrors.IsNotFound(err) {
		return Installed{}, nil
	}
	if err != nil {
		return Installed{}, fmt.Errorf("read configmap %s/%s: %w", namespace, InstalledConfigMap, err)
	}
	in := Installed{Version: cm.Data[InstalledVersionKey]}
	if s := cm.Data[InstalledReleaseKey]; s != "" {
		var rel release.Release
		if err := json.Unmarshal([]byte(s), &rel); err != nil {
			return Installed{}, fmt.Errorf("configmap %s/%s key %s: %w", namespace, InstalledConfigMap, InstalledReleaseKey, err)
		}
		in.Release = &rel
	}
	return in, nil
}

// installedConfigMap builds InstalledConfigMap for a version installed by plan.
func installedConfigMap(namespace, plan, version string, rel *release.Release) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: InstalledConfigMap},
		Data:       map[string]string{InstalledVersionKey: version, InstalledPlanKey: plan},
	}
	if rel != nil {
		data, err := json.Marshal(rel)
		if err != nil {
			return nil, fmt.Errorf("encode release metadata: %w", err)
		}
		cm.Data[InstalledReleaseKey] = string(data)
	}
	return cm, nil
}
