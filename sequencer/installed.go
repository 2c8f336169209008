package sequencer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/release"
)

// Where the installed version is recorded. Every successful plan marks its Version Installed
// (v1beta1.VersionInstalled, the other Versions Superseded) and rewrites InstalledConfigMap with
// the version and the release's metadata. ReadInstalled believes the Version first; the
// ConfigMap is the fallback for a cluster no plan has upgraded yet: the chart's
// sequencer.installedVersion value seeds it (SeedInstalled) and an administrator may write it
// by hand, as before Versions carried a status.

// InstalledConfigMap is the name of the ConfigMap, in the sequencer's namespace, that records the
// installed version for the next plan's policy checks.
const InstalledConfigMap = "upgrade-repo-installed"

// Keys of InstalledConfigMap.
const (
	// InstalledVersionKey holds the installed version (v1.5.2).
	InstalledVersionKey = "version"
	// InstalledReleaseKey holds the installed release's metadata as JSON, when known.
	InstalledReleaseKey = "release"
	// InstalledPlanKey names the plan that installed it; empty when it was seeded.
	InstalledPlanKey = "plan"
)

// Installed is the recorded installed version.
type Installed struct {
	// Version is the installed version; empty when unknown.
	Version string
	// Release is the installed release's metadata; nil when unknown.
	Release *release.Release
	// Source says where it was read: "version NAME" (its Installed condition) or
	// "configmap NAMESPACE/NAME"; empty when unknown.
	Source string
	// Since is when it was installed, when a Version records it.
	Since time.Time
}

// ReadInstalled reads the installed version: the Version whose Installed condition is True (the
// latest to become so, should there be several), else InstalledConfigMap in namespace. The
// release's metadata comes from the ConfigMap when it names the same version. Nothing recorded
// is not an error: it returns an empty Installed.
func ReadInstalled(ctx context.Context, r client.Reader, namespace string) (Installed, error) {
	var versions v1beta1.VersionList
	if err := r.List(ctx, &versions); err != nil {
		return Installed{}, fmt.Errorf("list versions: %w", err)
	}
	var in Installed
	for i := range versions.Items {
		v := &versions.Items[i]
		c := meta.FindStatusCondition(v.Status.Conditions, v1beta1.VersionInstalled)
		if c == nil || c.Status != metav1.ConditionTrue {
			continue
		}
		if t := c.LastTransitionTime.Time; in.Version == "" || t.After(in.Since) || t.Equal(in.Since) && v.Name > in.Version {
			in = Installed{Version: v.Name, Source: "version " + v.Name, Since: t}
		}
	}
	var cm corev1.ConfigMap
	err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: InstalledConfigMap}, &cm)
	if apierrors.IsNotFound(err) {
		return in, nil
	}
	if err != nil {
		return Installed{}, fmt.Errorf("read configmap %s/%s: %w", namespace, InstalledConfigMap, err)
	}
	cmVersion := cm.Data[InstalledVersionKey]
	switch {
	case in.Version == "" && cmVersion != "":
		in = Installed{Version: cmVersion, Source: fmt.Sprintf("configmap %s/%s", namespace, InstalledConfigMap)}
	case in.Version == "" || cmVersion != in.Version:
		return in, nil
	}
	if s := cm.Data[InstalledReleaseKey]; s != "" {
		var rel release.Release
		if err := json.Unmarshal([]byte(s), &rel); err != nil {
			return Installed{}, fmt.Errorf("configmap %s/%s key %s: %w", namespace, InstalledConfigMap, InstalledReleaseKey, err)
		}
		in.Release = &rel
	}
	return in, nil
}

// SeedInstalled records version as installed when nothing records an installed version yet:
// it creates InstalledConfigMap in namespace, never overwrites it, and does nothing when a
// Version is Installed. It reports whether it created the ConfigMap.
func SeedInstalled(ctx context.Context, c client.Client, namespace, version string) (bool, error) {
	if version == "" {
		return false, nil
	}
	in, err := ReadInstalled(ctx, c, namespace)
	if err != nil {
		return false, err
	}
	if in.Version != "" {
		return false, nil
	}
	cm, err := installedConfigMap(namespace, "", version, nil)
	if err != nil {
		return false, err
	}
	switch err := c.Create(ctx, cm); {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("create configmap %s/%s: %w", namespace, InstalledConfigMap, err)
	}
	return true, nil
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
