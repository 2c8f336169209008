package v1beta1_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

// crdSchema is what the API server does with an object of a generated CRD before it stores it:
// prune unknown fields, default, validate against the OpenAPI schema.
type crdSchema struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
}

func loadCRD(t *testing.T, file string) crdSchema {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "manifests", "crd", file))
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(data, &crd))
	require.Len(t, crd.Spec.Versions, 1)
	var props apiextensions.JSONSchemaProps
	require.NoError(t, apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, &props, nil))
	s, err := structuralschema.NewStructural(&props)
	require.NoError(t, err)
	v, _, err := validation.NewSchemaValidator(&props)
	require.NoError(t, err)
	return crdSchema{structural: s, validator: v}
}

// admit prunes, defaults and validates obj as the API server would, and returns what it keeps.
func (c crdSchema) admit(obj map[string]any) (map[string]any, field.ErrorList) {
	pruning.Prune(obj, c.structural, true)
	defaulting.Default(obj, c.structural)
	return obj, validation.ValidateCustomResource(nil, obj, c.validator)
}

func readObject(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, yaml.Unmarshal(data, &obj))
	return obj
}

// decode turns an admitted object into its Go type.
func decode(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	data, err := json.Marshal(obj)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, into))
}

// TestUpgradeDesignTestPlanObjects: the Version and the UpgradePlan of the upgrade design's test
// plan, written as the design writes them, are accepted by the generated CRDs with the defaults
// the chart's README documents.
func TestUpgradeDesignTestPlanObjects(t *testing.T) {
	t.Parallel()
	vobj, errs := loadCRD(t, "management.harvesterhci.io_versions.yaml").admit(readObject(t, "testdata/hep/version.yaml"))
	require.Empty(t, errs)
	var v v1beta1.Version
	decode(t, vobj, &v)
	require.Equal(t, "https://releases.rancher.com/harvester/v1.5.2/harvester-v1.5.2-amd64.iso", v.Spec.ISOURL)
	require.Len(t, v.Spec.ISOChecksum, 128)
	require.Equal(t, "20250917", v.Spec.ReleaseDate)

	pobj, errs := loadCRD(t, "management.harvesterhci.io_upgradeplans.yaml").admit(readObject(t, "testdata/hep/upgradeplan.yaml"))
	require.Empty(t, errs)
	var p v1beta1.UpgradePlan
	decode(t, pobj, &p)
	require.Equal(t, "v1.5.2", p.Spec.Version)
	require.Equal(t, v1beta1.ModeAutomatic, p.Spec.Mode, "the CRD defaults the mode")
	require.Nil(t, p.Spec.Upgrade, "no image: the sequencer's default")
	require.False(t, p.Spec.Force)
}

// TestCRDsRefuseBadObjects: the schema is not a sieve that lets anything through.
func TestCRDsRefuseBadObjects(t *testing.T) {
	t.Parallel()
	versions := loadCRD(t, "management.harvesterhci.io_versions.yaml")
	plans := loadCRD(t, "management.harvesterhci.io_upgradeplans.yaml")
	tests := []struct {
		name   string
		schema crdSchema
		file   string
		change func(map[string]any)
		field  string
	}{
		{name: "a checksum that is not a sha512", schema: versions, file: "version.yaml", field: "spec.isoChecksum",
			change: func(o map[string]any) { o["spec"].(map[string]any)["isoChecksum"] = "md5:abc" }},
		{name: "an ftp URL", schema: versions, file: "version.yaml", field: "spec.isoURL",
			change: func(o map[string]any) { o["spec"].(map[string]any)["isoURL"] = "ftp://x/y.iso" }},
		{name: "no URL", schema: versions, file: "version.yaml", field: "spec.isoURL",
			change: func(o map[string]any) { delete(o["spec"].(map[string]any), "isoURL") }},
		{name: "an unknown mode", schema: plans, file: "upgradeplan.yaml", field: "spec.mode",
			change: func(o map[string]any) { o["spec"].(map[string]any)["mode"] = "manual" }},
		{name: "no version", schema: plans, file: "upgradeplan.yaml", field: "spec.version",
			change: func(o map[string]any) { delete(o["spec"].(map[string]any), "version") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obj := readObject(t, filepath.Join("testdata", "hep", tt.file))
			tt.change(obj)
			_, errs := tt.schema.admit(obj)
			require.NotEmpty(t, errs)
			require.Equal(t, tt.field, errs[0].Field, "%v", errs)
		})
	}
}
